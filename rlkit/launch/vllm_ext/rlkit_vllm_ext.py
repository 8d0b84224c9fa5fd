"""Runs inside the vLLM server (its own venv, on its PYTHONPATH); imports nothing from rlkit.

`--worker-extension-cls rlkit_vllm_ext.RlkitWorkerExtension` adds a method to every vLLM
worker, called through `POST /collective_rpc`. On the CPU a tied `lm_head` keeps the packed
(oneDNN) copy of the embedding it was given at load time: `reload_weights` updates the
embedding but the output layer still computes with the old one (off by up to 3 nats).
Re-running the head's post-load step repacks it from the reloaded weights.
"""

from __future__ import annotations


class RlkitWorkerExtension:
    def reload_weights_repacked(self, weights_path: str) -> None:
        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        head = getattr(model, "lm_head", None)
        method = getattr(head, "quant_method", None)
        if method is not None:
            method.process_weights_after_loading(head)
