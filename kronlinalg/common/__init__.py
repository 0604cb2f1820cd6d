"""Operation-agnostic code shared by every operation: array-library specifics (backend),
argument checks (validation), the dtype table (dtypes), per-signature caches (signatures),
float32 modes (precision) and every run-time knob (config).  Imports no operation and not
the planner."""
