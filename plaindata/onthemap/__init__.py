"""OnTheMap synthetic commute data (Machanavajjhala et al., ICDE 2008; Abowd et al. 2009).

Algorithm 1 (:mod:`.algorithm1`), its privacy calculus (:mod:`.privacy`), the release pipeline with
Algorithm 2's domain shrinking, the beyond cell and accept/reject (:mod:`.release`, derivation in
its docstring), its statement (:mod:`.statement`), the public geography
(:mod:`.block_grid`, :mod:`.coarsening`) and commute data (:mod:`.commute_data`).
"""
