"""The Pool controller: a Pool declared in Kubernetes, held in battery (PO-*)."""
