// Flux's CLI, built only by the release tests to read the Manifests artifact back with Flux's
// own code (`flux pull artifact`, DP-033). Fetched through the Go module proxy, checked
// against go.sum (batteryop.testing.fluxcli).
module batteryop.local/flux

go 1.26.0

require github.com/fluxcd/flux2/v2 v2.9.5
