"""The one service scaffold shared by the reward, decoder and rollout services.

What every service needs and none should write again:

- ``settings``: the fields every service has (bind address, message limit, drain grace,
  credentials) and the rule that a service bound beyond loopback without credentials refuses to
  start unless told otherwise;
- ``auth``: the bearer-token check (constant time, scheme case-insensitive) and TLS / mTLS
  credentials for gRPC and for an HTTP gateway;
- ``admission``: the gRPC interceptor every call passes: token, drain refusal, in-flight count,
  and request parsing that answers ``INVALID_ARGUMENT`` to malformed bytes;
- ``grpc_server``: a new server with limits, health and reflection, binding, drain;
- ``cli``: ``rlvr-world serve X`` and ``python -m services.X`` from one option table;
- ``thread``: a started service in a background thread (tests, notebooks), and the signal loop;
- ``metrics``: Prometheus metrics of a gRPC service;
- ``client_auth``: the client side: credentials from arguments or the environment, attached to
  every call of a channel.

Each service keeps its own servicers, settings class and resources; services never import each
other. Nothing here imports a service, the trainer or the application layer.
"""
