// cert-manager's release whose CRDs judge the Manifests' cert-manager objects (CT-021,
// CT-023). Nothing is built from it by default: the tests read the CRDs its module zip carries
// (deploy/crds), checked against go.sum by `go mod download` (batteryop.testing.certmanager).
module batteryop.local/certmanager

go 1.26.0

require github.com/cert-manager/cert-manager v1.21.2
