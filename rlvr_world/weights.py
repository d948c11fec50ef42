"""File names of a policy weights folder, shared by the trainer (writer) and the rollout (reader).

A folder holds either a full model as ``save_pretrained`` writes it (``*.safetensors`` and
``config.json``) or a LoRA adapter (``ADAPTER_CONFIG`` beside the adapter's weights). Names only:
no I/O here.
"""

from __future__ import annotations

#: Present in a folder that holds a LoRA adapter rather than a full model.
ADAPTER_CONFIG = "adapter_config.json"
