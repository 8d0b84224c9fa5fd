"""Code loaded inside the vLLM server process (its own venv), never imported by rlkit."""
