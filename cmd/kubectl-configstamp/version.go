package main

import (
	"cmp"
	"context"
	"runtime"
	"strings"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Where config/default (and config/selfsigned, config/namespaced) install the
// manager: namespace configstamp-system, Deployment controller-manager with
// the configstamp- prefix, its container "manager".
const (
	defaultManagerNamespace  = "configstamp-system"
	defaultManagerDeployment = "configstamp-controller-manager"
	managerContainer         = "manager"
	// labelVersion is the recommended label for an application's version
	// (kubernetes.io/docs/concepts/overview/working-with-objects/common-labels).
	labelVersion = "app.kubernetes.io/version"
	unknown      = "unknown"
)

func versionFlags(fs *pflag.FlagSet, o *options) {
	fs.BoolVar(&o.clientOnly, "client", false, "the plugin's version only: no request to the cluster")
	fs.StringVar(&o.managerNamespace, "manager-namespace", defaultManagerNamespace, "the namespace configstamp's manager runs in")
	fs.StringVar(&o.managerDeployment, "manager-deployment", defaultManagerDeployment, "the name of configstamp's manager Deployment")
}

// versionResult is `version -o json|yaml`.
type versionResult struct {
	Client clientVersion `json:"client"`
	// Server is configstamp's version in the cluster; absent with --client.
	Server *serverVersion `json:"server,omitempty"`
	// KubernetesVersion is the API server's gitVersion (its /version);
	// absent with --client or when it was not readable.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
}

type clientVersion struct {
	// Version is the plugin's (-X main.version at link time; "devel").
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

type serverVersion struct {
	// Version is configstamp's version, or "unknown".
	Version string `json:"version"`
	// Source says where Version was read: "label app.kubernetes.io/version",
	// "pod template label app.kubernetes.io/version" or "image tag"; absent
	// when unknown.
	Source string `json:"source,omitempty"`
	// Namespace and Deployment name the manager Deployment read.
	Namespace  string `json:"namespace"`
	Deployment string `json:"deployment"`
	// Image is the manager container's image, when the Deployment was read.
	Image string `json:"image,omitempty"`
	// Error is why the Deployment could not be read (then Version is
	// "unknown"): no connection, forbidden, not found.
	Error string `json:"error,omitempty"`
}

// runVersion prints the plugin's version and the server's.
//
// The server's version is read from the manager Deployment, with a GET of
// deployments/configstamp-controller-manager in configstamp-system
// (--manager-namespace, --manager-deployment): the version is the
// Deployment's app.kubernetes.io/version label if set, else that label on its
// pod template, else the tag of the manager container's image (not "latest",
// not a digest). A Deployment GET is in the "view" ClusterRole most users
// hold. The manager's other signs of its version need more: its --version
// flag needs pods/exec; configstamp_build_info sits on /metrics, which wants
// a token authorised for the nonResourceURL /metrics and a way to the pod
// (pods/portforward or services/proxy). When the Deployment is not readable
// (forbidden, not found, no connection) the version is "unknown" with the
// reason, and the command still succeeds: the plugin's own version is
// printed whatever the cluster says.
func runVersion(ctx context.Context, o *options, _ []string) error {
	res := versionResult{Client: clientVersion{Version: cmp.Or(version, "devel"), GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}}
	if !o.clientOnly {
		res.Server, res.KubernetesVersion = o.serverVersion(ctx)
	}
	if done, err := o.machine(res); done {
		return err
	}
	rows := [][]cell{{c("Plugin version:"), c(res.Client.Version + " (" + res.Client.GoVersion + ", " + res.Client.Platform + ")")}}
	if s := res.Server; s != nil {
		where := "deployment " + s.Namespace + "/" + s.Deployment
		var detail string
		switch {
		case s.Error != "":
			detail = s.Error
		case s.Source != "":
			detail = "from the " + s.Source + " of " + where + ", image " + s.Image
		default:
			detail = "no " + labelVersion + " label and no version tag on the image " + s.Image + " of " + where
		}
		rows = append(rows, []cell{c("configstamp version:"), c(s.Version + " (" + detail + ")")})
		rows = append(rows, []cell{c("Kubernetes version:"), c(cmp.Or(res.KubernetesVersion, unknown))})
	}
	o.table(rows)
	return nil
}

// serverVersion reads configstamp's version from its manager Deployment and
// the API server's; see runVersion.
func (o *options) serverVersion(ctx context.Context) (*serverVersion, string) {
	s := &serverVersion{Version: unknown, Namespace: cmp.Or(o.managerNamespace, defaultManagerNamespace),
		Deployment: cmp.Or(o.managerDeployment, defaultManagerDeployment)}
	if err := o.connect(); err != nil {
		s.Error = err.Error()
		return s, ""
	}
	var kube string
	if info, err := o.client.Discovery().ServerVersion(); err == nil {
		kube = info.GitVersion
	}
	d, err := o.client.AppsV1().Deployments(s.Namespace).Get(ctx, s.Deployment, metav1.GetOptions{})
	if err != nil {
		s.Error = "cannot read it: " + err.Error()
		return s, kube
	}
	s.Image = managerImage(d)
	switch {
	case d.Labels[labelVersion] != "":
		s.Version, s.Source = d.Labels[labelVersion], "label "+labelVersion
	case d.Spec.Template.Labels[labelVersion] != "":
		s.Version, s.Source = d.Spec.Template.Labels[labelVersion], "pod template label "+labelVersion
	case imageTag(s.Image) != "":
		s.Version, s.Source = imageTag(s.Image), "image tag"
	}
	return s, kube
}

// managerImage is the image of the Deployment's manager container (the
// first container if none is named so).
func managerImage(d *appsv1.Deployment) string {
	cs := d.Spec.Template.Spec.Containers
	for _, ctr := range cs {
		if ctr.Name == managerContainer {
			return ctr.Image
		}
	}
	if len(cs) > 0 {
		return cs[0].Image
	}
	return ""
}

// imageTag is the tag of an image reference, "" when it has none, only a
// digest, or the tag "latest" (which names no version).
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@") // name:tag@sha256:...: the tag still counts
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon <= slash { // none, or the registry's port
		return ""
	}
	if tag := image[colon+1:]; tag != "latest" {
		return tag
	}
	return ""
}
