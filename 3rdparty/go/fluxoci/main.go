// Command fluxoci pulls a Flux OCI artifact (DP-031, DP-033, DP-034) with Flux's own library, github.com/fluxcd/pkg/oci
// (what `flux pull artifact` calls), for the release tests (batteryop.testing.fluxoci).
//
//	fluxoci oci://<host>/<repository>:<tag> <output folder>
//
// The registry is reached over plain HTTP (crane.Insecure, what `flux pull artifact
// --insecure-registry` adds): the tests' registry listens on loopback without TLS. Before it
// pulls, the manifest must carry Flux's media types, taken from the library's constants: a
// config of oci.CanonicalConfigMediaType and a first layer of oci.CanonicalContentMediaType
// (what an OCIRepository selecting that layer by media type asks). The layer is then extracted
// by the library as a gzipped tarball. On success it prints the artifact's metadata as read
// by the library (JSON); otherwise the library's error on stderr and exit status 1.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/fluxcd/pkg/oci"
	"github.com/google/go-containerregistry/pkg/crane"
	gcrv1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: fluxoci oci://<host>/<repository>:<tag> <output folder>")
		os.Exit(2)
	}
	meta, err := pull(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxoci: %v\n", err)
		os.Exit(1)
	}
	out, err := json.Marshal(meta)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxoci: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

func pull(artifactURL, output string) (*oci.Metadata, error) {
	if info, err := os.Stat(output); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("output %q is not a folder", output)
	}
	url, err := oci.ParseArtifactURL(artifactURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := oci.NewClient(append(oci.DefaultOptions(), crane.Insecure))
	options := append([]crane.Option{crane.WithContext(ctx)}, client.GetOptions()...)
	head, err := crane.Head(url, options...)
	if err != nil {
		return nil, err
	}
	if head.MediaType.IsIndex() {
		return nil, fmt.Errorf("%s is an image index (%s), not a Flux artifact", url, head.MediaType)
	}
	raw, err := crane.Manifest(url, options...)
	if err != nil {
		return nil, err
	}
	manifest, err := gcrv1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing manifest failed: %w", err)
	}
	if manifest.Config.MediaType != oci.CanonicalConfigMediaType {
		return nil, fmt.Errorf("config media type %q, want %q", manifest.Config.MediaType, oci.CanonicalConfigMediaType)
	}
	if len(manifest.Layers) == 0 || manifest.Layers[0].MediaType != oci.CanonicalContentMediaType {
		return nil, fmt.Errorf("first layer is not of media type %q", oci.CanonicalContentMediaType)
	}
	return client.Pull(ctx, url, output, oci.WithPullLayerType(oci.LayerTypeTarball))
}
