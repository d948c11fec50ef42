#!/usr/bin/env bash
# verl GRPO on the text-game task over a Ray cluster, rewards from the RLVR-World reward service.
# Run on the Ray head node after `ray start --head` there and `ray start --address=HEAD:6379` on
# the other nodes. Environment (defaults in brackets):
#   RLVR_VERL_NNODES [2], RLVR_VERL_GPUS_PER_NODE [8]
#   RLVR_VERL_MODEL [Qwen/Qwen2.5-1.5B-Instruct]: policy (Hugging Face id or folder)
#   RLVR_VERL_TRAIN_FILES, RLVR_VERL_VAL_FILES: verl parquet of text-game rows
#   RLVR_REWARD_ADDRESS: the reward service as every node sees it, e.g. dns:///reward:50051 or
#     "h1:50051,h2:50051" [dns:///reward.rlvr-world.svc.cluster.local:50051]
#   RLVR_REWARD_API_TOKEN: bearer token, when the service has one
# Extra arguments are passed on to verl as Hydra overrides (e.g. trainer.total_epochs=1).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${PYTHON:-python3}"
RLVR_VERL_ADAPTER="$("$python" -c 'import rlvr_world.adapters.verl as m; print(m.__file__)')"
export RLVR_VERL_ADAPTER

exec "$python" -m verl.trainer.main_ppo \
    --config-path="$repo_root/configs/verl" \
    --config-name=text_game_grpo \
    trainer.nnodes="${RLVR_VERL_NNODES:-2}" \
    trainer.n_gpus_per_node="${RLVR_VERL_GPUS_PER_NODE:-8}" \
    "$@"
