"""huvmlab: the lab (built on the huvm control plane)."""
