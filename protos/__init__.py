"""Protocol buffer definitions and their generated Python stubs."""
