package transport

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEmbedderLinksNoFastHTTP: a program that imports cache and transport
// compiles none of fasthttp, its compression libraries or the brotli port
// (transport/fast is the daemon's, and an embedder's who asks for it).
func TestEmbedderLinksNoFastHTTP(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to list the packages with")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/ringcache/ringcache/cache", "github.com/ringcache/ringcache/transport").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for p := range strings.Lines(string(out)) {
		for _, heavy := range []string{"github.com/valyala/", "github.com/klauspost/", "github.com/molecule-man/go-brrr"} {
			if strings.HasPrefix(p, heavy) {
				t.Errorf("cache and transport compile %s", strings.TrimSpace(p))
			}
		}
	}
}
