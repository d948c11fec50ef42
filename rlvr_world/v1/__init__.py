"""Generated gRPC stubs (``make protos``); never edit by hand. Source: ``protos/rlvr_world/v1``."""
