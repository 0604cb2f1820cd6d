"""Optional integrations with other libraries, each imported only when asked for
(``import kronlinalg.integrations.gpytorch`` needs torch and linear_operator)."""
