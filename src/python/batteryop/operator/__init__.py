"""The operator deployable: Pool and MicroVMClaim controllers on kopf (RS, CL, PO, DP)."""
