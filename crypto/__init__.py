"""Pure computation: quantization, HE-kNN-V plan, circuit and deployment API, trace chains.

No sockets and no files here, except functions whose job is (de)serialising a named artifact.
"""
