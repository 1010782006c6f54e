"""What every k-NN circuit family shares: concrete's compilation settings and the cost figures of a
compiled circuit."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from concrete import fhe


@dataclass(frozen=True)
class CircuitConfig:
    """Compilation settings. Defaults were chosen by measurement (``experiments/knn_bench.py``).

    sign_bits: bits kept for the final sign lookup after exact truncation of a distance difference.
    global_p_error: concrete's bound on the probability that any PBS of one evaluation is wrong;
        the default is concrete's own (1e-5), so a wrong class is a one-in-100,000 event at most.
    parameter_selection_strategy: concrete's "multi" (one parameter set per precision) or "mono".
    compress_*: concrete's seeded compression of evaluation keys and of input ciphertexts.
    """

    sign_bits: int = 4
    global_p_error: float = 1e-5
    parameter_selection_strategy: str = "multi"
    compress_evaluation_keys: bool = True
    compress_input_ciphertexts: bool = True

    def __post_init__(self) -> None:
        if not 2 <= self.sign_bits <= 8:
            raise ValueError("sign_bits must be between 2 and 8")
        if not 0.0 < self.global_p_error < 1.0:
            raise ValueError("global_p_error must be a probability strictly between 0 and 1")
        if self.parameter_selection_strategy not in ("multi", "mono"):
            raise ValueError("parameter_selection_strategy must be 'multi' or 'mono'")

    def to_dict(self) -> dict:
        return asdict(self)

    def concrete_configuration(self, simulation: bool = False, execution: bool = True) -> fhe.Configuration:
        """concrete's configuration. ``simulation`` lets the circuit run ``circuit.simulate``;
        ``execution=False`` compiles for simulation only (no keys, no encrypted run: about half the
        compile time, which is what the simulation-only tests use)."""
        return fhe.Configuration(
            global_p_error=self.global_p_error,
            p_error=None,
            parameter_selection_strategy=self.parameter_selection_strategy,
            compress_evaluation_keys=self.compress_evaluation_keys,
            compress_input_ciphertexts=self.compress_input_ciphertexts,
            fhe_simulation=simulation,
            fhe_execution=execution,
            show_progress=False,
            # every lookup's table spans its whole assigned width: concrete otherwise builds it over
            # the width the input set's bounds reached, and a value a query reaches beyond them (a
            # comparator the input set never saw on one side) reads a wrong or folded entry
            # (crypto.knn.thermo.circuit)
            optimize_tlu_based_on_original_bit_width=False,
        )


def circuit_statistics(circuit: fhe.Circuit | fhe.Server) -> dict:
    """Cost figures of a compiled circuit (or a loaded server): PBS count, complexity, key sizes."""
    return {
        "pbs_count": int(circuit.programmable_bootstrap_count),
        "complexity": float(circuit.complexity),
        "bootstrap_key_bytes": int(circuit.size_of_bootstrap_keys),
        "keyswitch_key_bytes": int(circuit.size_of_keyswitch_keys),
        "input_bytes": int(circuit.size_of_inputs),
        "output_bytes": int(circuit.size_of_outputs),
    }
