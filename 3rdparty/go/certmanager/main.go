// Command cert-manager-controller runs cert-manager's own controllers (the pinned module,
// github.com/cert-manager/cert-manager) on the real test node, so the Certificates install.yaml
// asks for are issued by cert-manager and not written by the tests (issue 27,
// batteryop.testing.kubenode.addons).
//
// Why a command of ours: cert-manager's controller program lives in a nested module of its
// repository that is not published as a Go module, so it cannot be built from a pin. Every
// controller registers itself with cert-manager's controller package when its package is
// linked in; this file only links in the ones install.yaml needs (the Certificate lifecycle,
// the self-signed and CA issuers, the approver, the Issuer and ClusterIssuer readiness), builds
// cert-manager's controller context from the in-cluster identity, starts the shared informers
// and runs each controller until SIGTERM. No leader election: one replica. No ACME, Vault,
// Venafi, Ingress or Gateway parts.
//
//	cert-manager-controller [--cluster-resource-namespace=NS] [--workers=N] [--healthz-address=ADDR] [klog flags]
//
// GET /readyz on the healthz address answers 200 once every informer the controllers use has
// synced (the Deployment's readiness probe), and /livez answers 200 while the process runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The controllers this command runs, by the names they register under.
var wanted = []string{
	"issuers",
	"clusterissuers",
	"certificates-trigger",
	"certificates-issuing",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-readiness",
	"certificates-revision-manager",
	"certificaterequests-approver",
	"certificaterequests-issuer-selfsigned",
	"certificaterequests-issuer-ca",
}

func main() {
	clusterNS := flag.String("cluster-resource-namespace", "cert-manager", "where ClusterIssuers keep their Secrets")
	workers := flag.Int("workers", 2, "workers per controller")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (default: the in-cluster identity)")
	healthz := flag.String("healthz-address", ":9403", "where /readyz and /livez are served")
	klog.InitFlags(nil)
	flag.Parse()
	logf.InitLogs()
	go serveHealth(*healthz)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background(), "cert-manager")
	if err := run(ctx, *kubeconfig, *clusterNS, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-controller:", err)
		os.Exit(1)
	}
}

var synced atomic.Bool

func serveHealth(address string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !synced.Load() {
			http.Error(w, "informers not synced", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	if err := http.ListenAndServe(address, mux); err != nil {
		klog.ErrorS(err, "healthz server")
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, clusterNS string, workers int) error {
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: clusterNS},
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	known := controllerpkg.Known()
	controllers := map[string]controllerpkg.Interface{}
	for _, name := range wanted {
		construct, ok := known[name]
		if !ok {
			names := make([]string, 0, len(known))
			for n := range known {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("controller %q is not registered (registered: %v)", name, names)
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("controller %q: %w", name, err)
		}
		controllers[name] = c
	}
	// The informers the controllers asked for exist now; start them once for all.
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	go func() {
		for name, ok := range shared.KubeSharedInformerFactory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				klog.ErrorS(nil, "informer did not sync", "type", name)
				return
			}
		}
		for name, ok := range shared.SharedInformerFactory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				klog.ErrorS(nil, "informer did not sync", "type", name.String())
				return
			}
		}
		synced.Store(true)
		klog.InfoS("informers synced")
	}()

	var wg sync.WaitGroup
	errs := make(chan error, len(controllers))
	for name, c := range controllers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("controller %q: %w", name, err)
			}
		}()
	}
	klog.InfoS("cert-manager controllers started", "controllers", wanted)
	select {
	case <-ctx.Done():
	case err := <-errs:
		return err // the kubelet restarts the container
	}
	wg.Wait()
	return nil
}
