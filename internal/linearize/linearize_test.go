package linearize

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestModel: a read of a PUT's value after a later read returned the
// origin's value (the PUT lost, then back) is illegal, and Explain names
// the key and the read; the same history without that last read is legal,
// and so is a read of the origin's value after a DELETE.
func TestModel(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var h History
	h.Add(1, Input{Op: "put", Key: "k", Value: "v1", Via: "n0"}, "", at(0), at(10), true)
	h.Add(2, Input{Op: "get", Key: "k", Via: "n1"}, "v1", at(20), at(30), true)
	h.Add(2, Input{Op: "get", Key: "k", Via: "n2"}, "", at(40), at(50), true)
	h.Add(3, Input{Op: "delete", Key: "j", Via: "n0"}, "", at(0), at(10), true)
	h.Add(3, Input{Op: "get", Key: "j", Via: "n0"}, "", at(20), at(30), true)
	ops, open := h.Close(at(100))
	if open != 0 {
		t.Fatalf("%d open writes, want 0", open)
	}
	if porcupine.CheckOperations(Model, ops) {
		t.Fatal("a PUT acknowledged, read, then read as the origin's value: legal")
	}
	if e := Explain(ops, nil); !strings.Contains(e, "key k:") || !strings.Contains(e, "n2 get(k) -> origin") {
		t.Fatalf("Explain = %q; want key k and the read that went back", e)
	}
	if !porcupine.CheckOperations(Model, ops[:2]) || !porcupine.CheckOperations(Model, ops[3:]) {
		t.Fatal("a legal history is illegal")
	}
	// A write whose outcome is unknown may land at any time after its call.
	var u History
	u.Add(1, Input{Op: "put", Key: "k", Value: "v1", Via: "n0"}, "", at(0), at(1), false)
	u.Add(2, Input{Op: "get", Key: "k", Via: "n1"}, "", at(20), at(30), true)
	u.Add(2, Input{Op: "get", Key: "k", Via: "n1"}, "v1", at(40), at(50), true)
	if ops, _ := u.Close(at(100)); !porcupine.CheckOperations(Model, ops) {
		t.Fatal("a write of unknown outcome read after an older read: illegal")
	}
}
