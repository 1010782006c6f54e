"""The analysis controller for binding analysis sequences (Domingo-Ferrer, PSD 2022).

Pure disclosure logic, no gRPC: ``analyses`` (declarative statistics), ``output_checking`` (acro's
rules), ``query_set_control`` (the audit of everything released), ``session_store`` (persistent
sessions). The gRPC layer: ``service``. Command-line flags: ``flags``.
"""
