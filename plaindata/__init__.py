"""Plain-data release mechanisms (noise and synthetic data) for comparison."""
