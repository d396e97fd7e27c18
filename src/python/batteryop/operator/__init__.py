"""The operator deployable: Pool and MicroVMClaim controllers (RS, CL, PO, DP)."""
