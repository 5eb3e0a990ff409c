"""Fakes at the boundaries the tests cannot cross on a machine without a GPU: NVIDIA's NVML binding
(:mod:`.fake_nvml`, the module ``pynvml`` of ``nvidia-ml-py``) and the few calls of torch that
``scripts/gpu-check.sh`` makes (:mod:`.torch`), both over one simulated GPU (:mod:`.fake_gpu`)."""
