"""Adaptive histograms and direct data synthesis ("Synthetic Data via Differential Privacy")."""
