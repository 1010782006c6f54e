"""The analysis controller for binding analysis sequences (Domingo-Ferrer, PSD 2022).

Pure disclosure logic, no gRPC: ``analyses`` (declarative statistics and the linear functionals each
reveals), ``output_checking`` (acro's rules and ours), ``release_history`` (the decision on an
analysis against everything released, to anyone: empty cells, ``query_set_control``'s pairwise rule,
``release_audit``'s exact audit over ``modular`` arithmetic and ``small_groups``' search), ``people``
(refusals, cool-downs, quotas and suspensions per person), ``session_store`` (persistent sessions,
releases and persons). The gRPC layer: ``service``. Options and flags: ``options``; what the
server builds at start: ``startup``; the data owner's ``petlab-server persons``:
``persons_command``.
"""
