// The Cluster API and Cluster API Provider AWS releases whose CRDs validate the Host pool
// templates in src/capi (HP-001..HP-031). Nothing is built from them: the tests read the CRDs
// that the module zips carry (config/crd/bases), checked against go.sum by `go mod download`.
module batteryop.local/capi

go 1.26.0

require (
	sigs.k8s.io/cluster-api v1.13.6
	sigs.k8s.io/cluster-api-provider-aws/v2 v2.13.0
)
