package cmrun

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// CRDDir is the directory of cert-manager's CustomResourceDefinitions in the
// module this repository requires (deploy/crds), for kubectl apply -f.
func CRDDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		return "", fmt.Errorf("locating the cert-manager module: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds"), nil
}

// Renew triggers a reissuance the way `cmctl renew` does: the Issuing
// condition set to True on the Certificate's status.
func Renew(ctx context.Context, cm cmclient.Interface, ns, name string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crt, err := cm.CertmanagerV1().Certificates(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		apiutil.SetCertificateCondition(crt, crt.Generation, cmapi.CertificateConditionIssuing, cmmeta.ConditionTrue,
			"ManuallyTriggered", "Certificate re-issuance manually triggered")
		_, err = cm.CertmanagerV1().Certificates(ns).UpdateStatus(ctx, crt, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("triggering the renewal of Certificate %s/%s: %w", ns, name, err)
	}
	return nil
}
