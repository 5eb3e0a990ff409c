"""The GPUs: what they are and what they did, read from NVIDIA's management library or a DCGM exporter.

- :mod:`.readings`: the facts a GPU is recorded by (its model, memory, driver and CUDA versions, power limit,
  clocks, MIG mode) and one reading of it (SM and memory-bandwidth utilisation, memory used, power, SM clock,
  energy counter), and how a reading is classified (SM busy, DRAM busy, idle);
- :mod:`.nvml`: NVML through its Python binding ``nvidia-ml-py`` (module ``pynvml``), taken through one seam
  (:func:`.nvml.binding`) so that tests put a fake in its place;
- :mod:`.dcgm`: the same facts and readings from a DCGM exporter's Prometheus page (a remote endpoint's GPUs);
- :mod:`.sampler`: a thread that takes readings at a set rate, off the measured path;
- :mod:`.check`: ``scripts/gpu-check.sh``: the sampler on a real GPU against a compute-bound and a
  bandwidth-bound workload.

:mod:`.readings`, :mod:`.nvml`, :mod:`.sampler` and :mod:`.check` use the standard library only (and torch, in
the check): the check runs from a working tree on a machine that has torch and nvidia-ml-py and none of
leverbench's own dependencies.
"""
