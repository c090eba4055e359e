// Package deploy holds the scripts, images and manifests that run a
// cluster; its test checks what the scripts decide before they run
// anything.
package deploy

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestImagesNamedAfterTheProject: the scripts tag the images they build
// after the Compose project, so that two clusters (a dev one and an e2e
// run, say) never replace each other's images.
func TestImagesNamedAfterTheProject(t *testing.T) {
	images := func(project string) []string {
		cmd := exec.Command("bash", "-c", `source ./lib.sh && echo "$RINGCACHE_IMAGE $RINGCACHE_ETCD_IMAGE"`)
		cmd.Env = append(os.Environ(), "COMPOSE_PROJECT_NAME="+project, "RINGCACHE_COMPOSE=docker-compose",
			"RINGCACHE_SECRET=0123456789abcdef-images-test", "RINGCACHE_IMAGE=", "RINGCACHE_ETCD_IMAGE=")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("source lib.sh: %v", err)
		}
		return strings.Fields(string(out))
	}
	a, b := images("alpha"), images("beta")
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("images %q and %q; want two each", a, b)
	}
	for i := range a {
		if a[i] == b[i] || !strings.Contains(a[i], "alpha") || !strings.Contains(b[i], "beta") {
			t.Errorf("project alpha builds %s, project beta %s; want each named after its project", a[i], b[i])
		}
	}
}
