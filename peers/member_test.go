package peers

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDecodeMember(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		id      string
		value   string
		want    Member
		wantErr error
	}{
		{"complete", "a", `{"id":"a","peer_url":"http://a:7070","weight":3,"version":"v1","started":"2025-01-02T03:04:05Z"}`,
			Member{ID: "a", PeerURL: "http://a:7070", Weight: 3, Version: "v1", Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}, nil},
		{"missing weight reads as 1", "a", `{"id":"a","peer_url":"https://a"}`, Member{ID: "a", PeerURL: "https://a", Weight: 1}, nil},
		{"unknown fields are ignored", "a", `{"id":"a","peer_url":"http://a","zone":"eu"}`, Member{ID: "a", PeerURL: "http://a", Weight: 1}, nil},
		{"leaving", "a", `{"id":"a","peer_url":"http://a","leaving":true}`, Member{ID: "a", PeerURL: "http://a", Weight: 1, Leaving: true}, nil},
		{"not json", "a", `http://a`, Member{}, ErrBadMember},
		{"empty", "a", ``, Member{}, ErrBadMember},
		{"id does not match key", "a", `{"id":"b","peer_url":"http://b"}`, Member{}, ErrBadMember},
		{"no url", "a", `{"id":"a"}`, Member{}, ErrBadPeerURL},
		{"relative url", "a", `{"id":"a","peer_url":"a:7070"}`, Member{}, ErrBadPeerURL},
		{"ftp url", "a", `{"id":"a","peer_url":"ftp://a"}`, Member{}, ErrBadPeerURL},
		{"url with query", "a", `{"id":"a","peer_url":"http://a/?x=1"}`, Member{}, ErrBadPeerURL},
		{"negative weight", "a", `{"id":"a","peer_url":"http://a","weight":-1}`, Member{}, ErrBadMember},
		{"huge weight", "a", `{"id":"a","peer_url":"http://a","weight":1000000}`, Member{}, ErrBadMember},
		{"weight of wrong type", "a", `{"id":"a","peer_url":"http://a","weight":"3"}`, Member{}, ErrBadMember},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := decodeMember(tt.id, []byte(tt.value))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrBadMember) {
				t.Errorf("err = %v does not wrap ErrBadMember", err)
			}
			if !sameMember(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestMemberRoundTrip(t *testing.T) {
	t.Parallel()
	m := Member{ID: "node-1", PeerURL: "http://10.0.0.1:7070/rc", Weight: 2, Version: "v0.1.0",
		Started: time.Now().UTC().Truncate(time.Millisecond), Leaving: true}
	v, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeMember("node-1", []byte(v))
	if err != nil {
		t.Fatal(err)
	}
	if !sameMember(got, m) {
		t.Fatalf("round trip: got %+v, want %+v", got, m)
	}
}

// FuzzDecodeMember checks that any value found under the prefix decodes without a panic, and
// that whatever decodes encodes back to an equal member.
func FuzzDecodeMember(f *testing.F) {
	f.Add("a", `{"id":"a","peer_url":"http://a:7070","weight":3,"started":"2025-01-02T03:04:05Z"}`)
	f.Add("a", `{"id":"a","peer_url":"http://a","leaving":true}`)
	f.Add("x", `{"id":"x","peer_url":"https://[::1]:1/p","weight":1000}`)
	f.Add("a", `{`)
	f.Fuzz(func(t *testing.T, id, value string) {
		m, err := decodeMember(id, []byte(value))
		if err != nil {
			if !errors.Is(err, ErrBadMember) {
				t.Fatalf("error %v does not wrap ErrBadMember", err)
			}
			return
		}
		if m.ID != id || m.Weight < 1 || m.Weight > MaxWeight || checkPeerURL(m.PeerURL) != nil {
			t.Fatalf("accepted an invalid member %+v", m)
		}
		v, err := m.encode()
		if err != nil {
			t.Fatalf("encode %+v: %v", m, err)
		}
		again, err := decodeMember(id, []byte(v))
		if err != nil || !sameMember(again, m) {
			t.Fatalf("round trip of %+v: %+v, %v", m, again, err)
		}
	})
}

func TestCheckID(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "node-1", "ringcache-0.ringcache.svc", "10.0.0.1:7070", "A_b", strings.Repeat("x", 128)} {
		if !checkID(ok) {
			t.Errorf("checkID(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "a/b", "a b", "é", "a\n", strings.Repeat("x", 129)} {
		if checkID(bad) {
			t.Errorf("checkID(%q) = true", bad)
		}
	}
}

// TestPeerWeights checks what a WeightedSetter receives: every URL with its member's weight,
// and for two members on one URL the larger weight, whatever their order.
func TestPeerWeights(t *testing.T) {
	t.Parallel()
	a, b, twin := member("a"), member("b"), member("twin")
	b.Weight = 3
	twin.PeerURL, twin.Weight = a.PeerURL, 4
	want := map[string]int{a.PeerURL: 4, b.PeerURL: 3}
	for _, ms := range [][]Member{{a, b, twin}, {twin, b, a}} {
		if got := peerWeights(ms); !maps.Equal(got, want) {
			t.Errorf("peerWeights(%v) = %v, want %v", ids(ms), got, want)
		}
		if got := peerURLs(ms); !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
			t.Errorf("peerURLs(%v) = %q, want the keys of %v", ids(ms), got, want)
		}
	}
}
