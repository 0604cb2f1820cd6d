"""airspeed-velocity benchmarks of kronlinalg: one module per operation (kron.py, ...).

Run from asv_bench/: ``asv run`` (builds a wheel per commit in a virtualenv), or against the
package already installed here: ``asv run --environment existing:python --quick``.
"""
