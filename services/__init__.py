"""Network services of RLVR-World (reward, decoder, rollout): thin adapters over the core."""
