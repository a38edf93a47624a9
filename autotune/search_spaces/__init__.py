"""Search spaces of the shipped kernels: parameters, constraints, default config, shape buckets."""
