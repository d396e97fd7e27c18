"""battery-operator: Pool and MicroVMClaim for battery's warm pools of Firecracker MicroVMs."""
