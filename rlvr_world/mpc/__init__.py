"""Using the video world models: PushT model-predictive control and policy evaluation."""
