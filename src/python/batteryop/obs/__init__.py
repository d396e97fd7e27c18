"""Observability shared by the deployables: metrics, health endpoints, logging setup."""
