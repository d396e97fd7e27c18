// Flux's OCI library (what `flux pull artifact` calls), built by the release tests into a tiny
// command that reads the Manifests artifact back (DP-033): batteryop.testing.fluxoci. The
// version is the one the pinned Flux CLI (3rdparty/go/flux) requires, so both read alike.
module batteryop.local/fluxoci

go 1.26.0

require (
	github.com/fluxcd/pkg/oci v0.68.1
	github.com/google/go-containerregistry v0.21.5
)

require (
	github.com/Masterminds/semver/v3 v3.5.0 // indirect
	github.com/containerd/stargz-snapshotter/estargz v0.18.2 // indirect
	github.com/cyphar/filepath-securejoin v0.6.1 // indirect
	github.com/docker/cli v29.4.0+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.5 // indirect
	github.com/fluxcd/pkg/sourceignore v0.18.0 // indirect
	github.com/fluxcd/pkg/tar v1.2.0 // indirect
	github.com/fluxcd/pkg/version v0.16.0 // indirect
	github.com/klauspost/compress v1.18.5 // indirect
	github.com/mitchellh/go-homedir v1.1.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/vbatts/tar-split v0.12.2 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.43.0 // indirect
)
