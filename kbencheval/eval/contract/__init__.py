"""What both sides of the trust line import, and nothing that pulls either side in.

protocol.py (typed messages, Status), inputs.py (trial -> model and tensors, digests), seeds.py (stress
input names), timing.py (the per-model timer both the worker and the judge run), device_kernels.py
(which kernels ran), transfer.py (tensors without pickle), errors.py (one readable line).
"""
