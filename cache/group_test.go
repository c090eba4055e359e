package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringcache/ringcache/cache/internal/store"
)

func TestNewGroupValidates(t *testing.T) {
	t.Parallel()
	getter := GetterFunc(func(context.Context, string) (Value, error) { return Value{}, nil })
	ok := GroupConfig{Name: "g", Getter: getter, MaxBytes: 1000}
	tests := []struct {
		name   string
		modify func(*GroupConfig)
		field  string // named in the error; empty: valid
	}{
		{"valid", func(*GroupConfig) {}, ""},
		{"no name", func(c *GroupConfig) { c.Name = "" }, "Name"},
		{"no getter", func(c *GroupConfig) { c.Getter = nil }, "Getter"},
		{"zero MaxBytes", func(c *GroupConfig) { c.MaxBytes = 0 }, "MaxBytes"},
		{"negative MaxBytes", func(c *GroupConfig) { c.MaxBytes = -1 }, "MaxBytes"},
		{"HotBytes = MaxBytes", func(c *GroupConfig) { c.HotBytes = 1000 }, "HotBytes"},
		{"negative HotBytes disables", func(c *GroupConfig) { c.HotBytes = -1 }, ""},
		{"unknown Policy", func(c *GroupConfig) { c.Policy = "lfu" }, "Policy"},
		{"negative Copies", func(c *GroupConfig) { c.Copies = -1 }, "Copies"},
		{"Copies over MaxCopies", func(c *GroupConfig) { c.Copies = MaxCopies + 1 }, "Copies"},
		{"Policy lru", func(c *GroupConfig) { c.Policy = PolicyLRU }, ""},
		{"negative MaxValueBytes", func(c *GroupConfig) { c.MaxValueBytes = -1 }, "MaxValueBytes"},
		{"HotAfter 256", func(c *GroupConfig) { c.HotAfter = 256 }, "HotAfter"},
		{"negative HotAfter", func(c *GroupConfig) { c.HotAfter = -1 }, "HotAfter"},
		{"negative TTL", func(c *GroupConfig) { c.TTL = -time.Second }, "TTL"},
		{"negative NotFoundTTL", func(c *GroupConfig) { c.NotFoundTTL = -1 }, "NotFoundTTL"},
		{"negative LoadTimeout", func(c *GroupConfig) { c.LoadTimeout = -1 }, "LoadTimeout"},
		{"negative FallbackTTL", func(c *GroupConfig) { c.FallbackTTL = -1 }, "FallbackTTL"},
		{"negative HotWindow", func(c *GroupConfig) { c.HotWindow = -1 }, "HotWindow"},
		{"negative HotTTL", func(c *GroupConfig) { c.HotTTL = -1 }, "HotTTL"},
		{"negative StaleWhileRevalidate", func(c *GroupConfig) { c.StaleWhileRevalidate = -1 }, "StaleWhileRevalidate"},
		{"negative StaleIfError", func(c *GroupConfig) { c.StaleIfError = -1 }, "StaleIfError"},
		{"negative ErrorTTL turns errors off", func(c *GroupConfig) { c.ErrorTTL = -time.Hour }, ""},
		{"HotAfter 255", func(c *GroupConfig) { c.HotAfter = 255 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := ok
			tt.modify(&cfg)
			_, err := newNode(t, Config{}).NewGroup(cfg)
			if verr := cfg.Validate(); (verr == nil) != (err == nil) {
				t.Fatalf("NewGroup = %v but Validate = %v", err, verr)
			}
			if tt.field == "" {
				if err != nil {
					t.Fatalf("NewGroup: %v", err)
				}
				return
			}
			ce, isCE := errors.AsType[*ConfigError](err)
			if !isCE || ce.Field != tt.field || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("NewGroup err = %v, want a ConfigError for %s matching ErrConfig", err, tt.field)
			}
		})
	}
}

func TestGroupConfigDefaults(t *testing.T) {
	t.Parallel()
	g := newTestGroup(t, GroupConfig{MaxBytes: 8000}, nil)
	got := g.Config()
	want := GroupConfig{
		Name: "g", MaxBytes: 8000, HotBytes: 1000, Policy: PolicySLRU, Copies: 1,
		LoadTimeout: 30 * time.Second, MaxValueBytes: 1 << 20, FallbackTTL: 5 * time.Second, ErrorTTL: time.Second,
		HotAfter: 3, HotWindow: 10 * time.Second, HotTTL: time.Minute,
		MaxLoads: 64, LoadQueue: 4096, LoadQueueWait: 5 * time.Second,
	}
	got.Getter = nil // a func: not comparable
	if got != want {
		t.Fatalf("Config() = %+v\nwant %+v", got, want)
	}
	// One budget: the main cache's bound is all of it, of which the hot
	// cache's part counts only as far as copies use it.
	if shared, part := g.main.Shares(); g.main.MaxBytes() != 8000 || g.hot.MaxBytes() != 1000 || part != 1000 || shared != g.hot {
		t.Fatalf("main %d (sharing %d with hot), hot %d bytes; want 8000 (1000), 1000",
			g.main.MaxBytes(), part, g.hot.MaxBytes())
	}
}

func TestNodeGroups(t *testing.T) {
	t.Parallel()
	getter := GetterFunc(func(context.Context, string) (Value, error) { return Value{}, nil })
	n := newNode(t, Config{})
	for _, name := range []string{"b", "c", "a"} {
		if _, err := n.NewGroup(GroupConfig{Name: name, Getter: getter, MaxBytes: 1 << 10}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.NewGroup(GroupConfig{Name: "a", Getter: getter, MaxBytes: 1 << 10}); !errors.Is(err, ErrGroupExists) {
		t.Fatalf("duplicate NewGroup err = %v, want ErrGroupExists", err)
	}
	var names []string
	for _, g := range n.Groups() {
		names = append(names, g.Name())
	}
	if fmt.Sprint(names) != "[a b c]" {
		t.Fatalf("Groups() = %v, want [a b c]", names)
	}
	if g, ok := n.Group("b"); !ok || g.Name() != "b" {
		t.Fatalf("Group(b) = %v, %v", g, ok)
	}
	if _, ok := n.Group("zzz"); ok {
		t.Fatal("Group(zzz) found")
	}
	// No process-wide state: another node may use the same names.
	if _, err := newNode(t, Config{}).NewGroup(GroupConfig{Name: "a", Getter: getter, MaxBytes: 1 << 10}); err != nil {
		t.Fatalf("a second node's group a: %v", err)
	}
}

func TestGetLoadsOnceAndCaches(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	g := newTestGroup(t, GroupConfig{}, o.getter(0).(GetterFunc))
	mustGet(t, g, "k", "v:k")
	mustGet(t, g, "k", "v:k")
	if o.total.Load() != 1 {
		t.Fatalf("loads = %d, want 1", o.total.Load())
	}
	s := g.Stats()
	want := Stats{Gets: 2, MainHits: 1, LocalLoads: 1, MainBytes: entrySize("k", Value{Data: []byte("v:k")}), MainItems: 1}
	if s != want {
		t.Fatalf("Stats() = %+v\nwant %+v", s, want)
	}
}

func TestBadKeysNeverReachTheOrigin(t *testing.T) {
	t.Parallel()
	var loads atomic.Int64
	g := newTestGroup(t, GroupConfig{}, func(context.Context, string) (Value, error) {
		loads.Add(1)
		return Value{}, nil
	})
	ctx := t.Context()
	calls := map[string]func() error{
		"Get":      func() error { _, err := g.Get(ctx, ""); return err },
		"getLocal": func() error { _, err := g.getLocal(ctx, "", "", 0, nil); return err },
		"Set":      func() error { _, err := g.Set(ctx, "", Value{}); return err },
		"setLocal": func() error { _, err := g.setLocal(ctx, "", Value{}); return err },
		"Remove":   func() error { _, err := g.Remove(ctx, ""); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrBadKey) {
			t.Errorf("%s(\"\") err = %v, want ErrBadKey", name, err)
		}
	}
	g.dropLocal("", "", false) // must not panic
	if loads.Load() != 0 {
		t.Fatalf("the origin saw %d loads", loads.Load())
	}
	if s := g.Stats(); s.Errors != 2 || s.Gets != 2 {
		t.Fatalf("Stats: Gets %d, Errors %d; want 2, 2", s.Gets, s.Errors)
	}
}

// TestOriginErrorIsRememberedForErrorTTL: a failed load is not a value, but
// the callers within ErrorTTL get the same error without a load, so that a
// failing origin is asked once per key and interval.
func TestOriginErrorIsRememberedForErrorTTL(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		var loads atomic.Int64
		g := newTestGroup(t, GroupConfig{}, func(context.Context, string) (Value, error) {
			loads.Add(1)
			return Value{}, boom
		})
		for range 50 {
			_, err := g.Get(t.Context(), "k")
			if !errors.Is(err, ErrLoad) || !errors.Is(err, boom) || errors.Is(err, ErrNotFound) {
				t.Fatalf("err = %v, want ErrLoad wrapping boom", err)
			}
		}
		if loads.Load() != 1 {
			t.Fatalf("loads = %d within ErrorTTL, want 1", loads.Load())
		}
		time.Sleep(time.Second) // the default ErrorTTL
		if _, err := g.Get(t.Context(), "k"); !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
		if loads.Load() != 2 {
			t.Fatalf("loads = %d after ErrorTTL, want 2", loads.Load())
		}
		if s := g.Stats(); s.Errors != 51 || s.MainItems != 0 {
			t.Fatalf("Stats: Errors %d, MainItems %d; want 51, 0", s.Errors, s.MainItems)
		}
		// A write of the key forgets the failure at once.
		if _, err := g.Set(t.Context(), "k", Value{Data: []byte("w")}); err != nil {
			t.Fatal(err)
		}
		mustGet(t, g, "k", "w")
	})
}

// TestErrorTTLNegativeDisablesIt: every request reaches the failing origin.
func TestErrorTTLNegativeDisablesIt(t *testing.T) {
	t.Parallel()
	var loads atomic.Int64
	g := newTestGroup(t, GroupConfig{ErrorTTL: -1}, func(context.Context, string) (Value, error) {
		loads.Add(1)
		return Value{}, errors.New("boom")
	})
	for range 3 {
		if _, err := g.Get(t.Context(), "k"); !errors.Is(err, ErrLoad) {
			t.Fatalf("err = %v", err)
		}
	}
	if loads.Load() != 3 {
		t.Fatalf("loads = %d, want 3", loads.Load())
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	notFound := fmt.Errorf("users: no row: %w", ErrNotFound)
	getter := func(loads *atomic.Int64) GetterFunc {
		return func(context.Context, string) (Value, error) {
			loads.Add(1)
			return Value{}, notFound
		}
	}
	t.Run("not remembered by default", func(t *testing.T) {
		t.Parallel()
		var loads atomic.Int64
		g := newTestGroup(t, GroupConfig{}, getter(&loads))
		for range 3 {
			_, err := g.Get(t.Context(), "k")
			if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrLoad) {
				t.Fatalf("err = %v, want ErrNotFound and not ErrLoad", err)
			}
		}
		if loads.Load() != 3 {
			t.Fatalf("loads = %d, want 3", loads.Load())
		}
		if s := g.Stats(); s.NotFounds != 3 || s.Errors != 0 {
			t.Fatalf("Stats: NotFounds %d, Errors %d; want 3, 0", s.NotFounds, s.Errors)
		}
	})
	t.Run("remembered for NotFoundTTL", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var loads atomic.Int64
			g := newTestGroup(t, GroupConfig{NotFoundTTL: 5 * time.Second, TTL: time.Hour}, getter(&loads))
			for range 3 {
				if _, err := g.Get(t.Context(), "k"); !errors.Is(err, ErrNotFound) {
					t.Fatalf("err = %v, want ErrNotFound", err)
				}
			}
			if loads.Load() != 1 {
				t.Fatalf("loads = %d within NotFoundTTL, want 1", loads.Load())
			}
			time.Sleep(5 * time.Second)
			if _, err := g.Get(t.Context(), "k"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
			if loads.Load() != 2 {
				t.Fatalf("loads = %d after NotFoundTTL, want 2", loads.Load())
			}
			if s := g.Stats(); s.NotFounds != 4 || s.MainHits != 0 {
				t.Fatalf("Stats: NotFounds %d, MainHits %d; want 4, 0", s.NotFounds, s.MainHits)
			}
		})
	})
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	t.Run("group TTL", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			o := newOrigin()
			g := newTestGroup(t, GroupConfig{TTL: 10 * time.Second}, o.getter(0).(GetterFunc))
			start := time.Now()
			v := mustGet(t, g, "k", "v:k")
			if !v.Expires.Equal(start.Add(10 * time.Second)) {
				t.Fatalf("Expires = %v, want start+10s", v.Expires)
			}
			time.Sleep(10*time.Second - 1)
			mustGet(t, g, "k", "v:k")
			if o.total.Load() != 1 {
				t.Fatalf("loads = %d before the TTL, want 1", o.total.Load())
			}
			time.Sleep(time.Nanosecond) // to the instant of the TTL
			mustGet(t, g, "k", "v:k")
			if o.total.Load() != 2 {
				t.Fatalf("loads = %d at the TTL, want 2", o.total.Load())
			}
		})
	})
	t.Run("value Expires wins over TTL", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			var loads atomic.Int64
			g := newTestGroup(t, GroupConfig{TTL: 10 * time.Second}, func(context.Context, string) (Value, error) {
				loads.Add(1)
				return Value{Data: []byte("x"), Expires: time.Now().Add(3 * time.Second)}, nil
			})
			mustGet(t, g, "k", "x")
			time.Sleep(2 * time.Second)
			mustGet(t, g, "k", "x")
			time.Sleep(time.Second)
			mustGet(t, g, "k", "x")
			if loads.Load() != 2 {
				t.Fatalf("loads = %d, want 2 (expired after 3s, not 10s)", loads.Load())
			}
		})
	})
	t.Run("no TTL: kept until evicted", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			o := newOrigin()
			g := newTestGroup(t, GroupConfig{}, o.getter(0).(GetterFunc))
			if v := mustGet(t, g, "k", "v:k"); !v.Expires.IsZero() {
				t.Fatalf("Expires = %v, want zero", v.Expires)
			}
			time.Sleep(1000 * time.Hour)
			mustGet(t, g, "k", "v:k")
			if o.total.Load() != 1 {
				t.Fatalf("loads = %d, want 1", o.total.Load())
			}
		})
	})
}

// TestConcurrentMissesLoadOnce: 200 callers of a cold key, all waiting before
// the origin answers, cause one load; 199 of them share it.
func TestConcurrentMissesLoadOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var loads atomic.Int64
		g := newTestGroup(t, GroupConfig{}, func(context.Context, string) (Value, error) {
			loads.Add(1)
			<-release
			return Value{Data: []byte("x")}, nil
		})
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for range 200 {
			wg.Go(func() {
				v, err := g.Get(context.Background(), "k")
				if err == nil && string(v.Data) != "x" {
					err = fmt.Errorf("got %q", v.Data)
				}
				errs <- err
			})
		}
		synctest.Wait() // every caller is waiting on the one load
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if loads.Load() != 1 {
			t.Fatalf("loads = %d, want 1", loads.Load())
		}
		if s := g.Stats(); s.LoadsDeduped != 199 || s.LocalLoads != 1 {
			t.Fatalf("Stats: LoadsDeduped %d, LocalLoads %d; want 199, 1", s.LoadsDeduped, s.LocalLoads)
		}
	})
}

// TestSlowOriginCallerCancels: the caller that started a slow load cancels;
// it leaves at once, the load goes on and the 199 others get the value.
func TestSlowOriginCallerCancels(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var loadCtx atomic.Pointer[context.Context]
		var loads atomic.Int64
		g := newTestGroup(t, GroupConfig{}, func(ctx context.Context, _ string) (Value, error) {
			loads.Add(1)
			loadCtx.Store(&ctx)
			<-release
			return Value{Data: []byte("x")}, nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() {
			_, err := g.Get(ctx, "k")
			first <- err
		}()
		synctest.Wait() // the canceller is the leader, its load is running
		var wg sync.WaitGroup
		var got atomic.Int64
		for range 199 {
			wg.Go(func() {
				if v, err := g.Get(context.Background(), "k"); err == nil && string(v.Data) == "x" {
					got.Add(1)
				}
			})
		}
		synctest.Wait()
		cancel()
		synctest.Wait()
		select {
		case err := <-first:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("canceller err = %v, want context.Canceled", err)
			}
		default:
			t.Fatal("the canceller is still waiting for the load")
		}
		if err := (*loadCtx.Load()).Err(); err != nil {
			t.Fatalf("the load's context ended with its first caller: %v", err)
		}
		close(release)
		wg.Wait()
		if got.Load() != 199 || loads.Load() != 1 {
			t.Fatalf("%d callers got the value from %d loads; want 199 from 1", got.Load(), loads.Load())
		}
		if s := g.Stats(); s.LoadsDeduped != 199 || s.Errors != 1 {
			t.Fatalf("Stats: LoadsDeduped %d, Errors %d; want 199, 1", s.LoadsDeduped, s.Errors)
		}
	})
}

func TestLoadTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newTestGroup(t, GroupConfig{LoadTimeout: 2 * time.Second}, func(ctx context.Context, _ string) (Value, error) {
			<-ctx.Done()
			return Value{}, ctx.Err()
		})
		start := time.Now()
		_, err := g.Get(t.Context(), "k")
		if !errors.Is(err, ErrLoad) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrLoad and context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("Get returned after %v, want the 2s LoadTimeout", d)
		}
	})
}

func TestPanickingGetter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var logs syncBuffer
		var panicking atomic.Bool
		panicking.Store(true)
		release := make(chan struct{})
		n := newNode(t, Config{Logger: bufferLogger(&logs)})
		g, err := n.NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, Getter: GetterFunc(func(context.Context, string) (Value, error) {
			if panicking.Load() {
				<-release
				panic("getter bug")
			}
			return Value{Data: []byte("x")}, nil
		})})
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 10)
		for range 10 {
			go func() {
				_, err := g.Get(context.Background(), "k")
				errs <- err
			}()
		}
		synctest.Wait()
		close(release)
		for range 10 {
			if err := <-errs; !errors.Is(err, ErrLoad) || !strings.Contains(err.Error(), "getter bug") {
				t.Fatalf("err = %v, want ErrLoad mentioning the panic", err)
			}
		}
		if !strings.Contains(logs.String(), "load panicked") || !strings.Contains(logs.String(), "getter bug") {
			t.Fatalf("the panic was not logged: %q", logs.String())
		}
		panicking.Store(false)
		if _, err := g.Get(context.Background(), "k"); !errors.Is(err, ErrLoad) {
			t.Fatalf("err = %v within ErrorTTL, want the remembered failure", err)
		}
		time.Sleep(time.Second)
		mustGet(t, g, "k", "x") // the key is not stuck
	})
}

func TestGetterGoexitDoesNotStrandWaiters(t *testing.T) {
	t.Parallel()
	g := newTestGroup(t, GroupConfig{}, func(context.Context, string) (Value, error) {
		runtime_Goexit()
		return Value{}, nil
	})
	if _, err := g.Get(t.Context(), "k"); !errors.Is(err, ErrLoad) {
		t.Fatalf("err = %v, want ErrLoad", err)
	}
}

func TestNoStore(t *testing.T) {
	t.Parallel()
	var loads atomic.Int64
	g := newTestGroup(t, GroupConfig{}, func(context.Context, string) (Value, error) {
		loads.Add(1)
		return Value{Data: []byte("x"), NoStore: true}, nil
	})
	mustGet(t, g, "k", "x")
	mustGet(t, g, "k", "x")
	if loads.Load() != 2 || g.Stats().MainItems != 0 {
		t.Fatalf("loads %d, MainItems %d; want 2, 0", loads.Load(), g.Stats().MainItems)
	}
	// setLocal of a NoStore value drops the current one.
	if _, err := g.setLocal(t.Context(), "s", Value{Data: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.setLocal(t.Context(), "s", Value{Data: []byte("new"), NoStore: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.main.Get("s", new(store.Clock)); ok {
		t.Fatal("setLocal with NoStore left the old value")
	}
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	var loads atomic.Int64
	g := newTestGroup(t, GroupConfig{MaxValueBytes: 10}, func(_ context.Context, key string) (Value, error) {
		loads.Add(1)
		return Value{Data: []byte(strings.Repeat("x", len(key)))}, nil
	})
	if _, err := g.setLocal(t.Context(), "k", Value{Data: make([]byte, 11)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("setLocal err = %v, want ErrTooLarge", err)
	}
	if _, err := g.Set(t.Context(), "k", Value{Data: make([]byte, 11)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Set err = %v, want ErrTooLarge", err)
	}
	if _, err := g.Set(t.Context(), "k", Value{Data: make([]byte, 10)}); err != nil {
		t.Fatalf("Set at the limit: %v", err)
	}
	// From the origin: refused with ErrTooLarge inside ErrLoad, the same
	// rule as for writes, and remembered for ErrorTTL like any failure.
	big := "0123456789a"
	for range 2 {
		if _, err := g.Get(t.Context(), big); !errors.Is(err, ErrLoad) || !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Get(%q) err = %v, want ErrLoad and ErrTooLarge", big, err)
		}
	}
	if loads.Load() != 1 {
		t.Fatalf("loads = %d, want 1 (the refusal is remembered)", loads.Load())
	}
	if s := g.Stats(); s.TooLarge != 3 || s.Errors != 0 || s.MainItems != 1 {
		t.Fatalf("Stats: TooLarge %d, Errors %d, MainItems %d; want 3, 0 (too large is not a failure of ours), 1", s.TooLarge, s.Errors, s.MainItems)
	}
}

func TestGroupByteBudget(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	g := newTestGroup(t, GroupConfig{MaxBytes: 20 * (store.Overhead + 10)}, o.getter(0).(GetterFunc))
	for i := range 100 {
		mustGet(t, g, fmt.Sprintf("key%03d", i), fmt.Sprintf("v:key%03d", i))
	}
	s := g.Stats()
	if s.MainBytes > g.main.MaxBytes() || s.Evictions == 0 {
		t.Fatalf("MainBytes %d (budget %d), Evictions %d", s.MainBytes, g.main.MaxBytes(), s.Evictions)
	}
	assertAccounting(t, g.main)
	// The newest keys are cached, the oldest were evicted.
	before := o.total.Load()
	mustGet(t, g, "key099", "v:key099")
	mustGet(t, g, "key000", "v:key000")
	if got := o.total.Load() - before; got != 1 {
		t.Fatalf("loads = %d, want 1 (key000 only)", got)
	}
}

// TestGroupAccountingUnderConcurrency hammers one group with Gets, Sets and
// Removes and then checks the byte invariant on both caches.
func TestGroupAccountingUnderConcurrency(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, hashOwner(2), GroupConfig{MaxBytes: 30 * (store.Overhead + 20), HotBytes: 10 * (store.Overhead + 20), HotAfter: 1},
		func(i int) Getter { return newOrigin().getter(i) })
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			g := c.groups[w%2]
			for i := range 500 {
				key := fmt.Sprintf("k%d", (i*7+w)%60)
				switch i % 10 {
				case 0:
					g.Remove(context.Background(), key)
				case 1:
					g.Set(context.Background(), key, Value{Data: []byte(key)})
				default:
					if _, err := g.Get(context.Background(), key); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	for _, g := range c.groups {
		assertAccounting(t, g.main)
		assertAccounting(t, g.hot)
	}
}

// TestRemoveDuringLoad: a load that began before a Remove returns its value
// to its callers but does not cache it.
func TestRemoveDuringLoad(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var loads atomic.Int64
		g := newTestGroup(t, GroupConfig{}, func(context.Context, string) (Value, error) {
			if loads.Add(1) == 1 {
				<-release
				return Value{Data: []byte("old")}, nil
			}
			return Value{Data: []byte("new")}, nil
		})
		done := make(chan Value)
		go func() {
			v, _ := g.Get(context.Background(), "k")
			done <- v
		}()
		synctest.Wait()
		g.dropLocal("k", "", false)
		mustGet(t, g, "k", "new") // arrives after Remove: does not join the old load
		close(release)
		// Its load was voided, and the value stored since replaces its
		// result (newerThanLoad).
		if v := <-done; string(v.Data) != "new" {
			t.Fatalf("first caller got %q, want new", v.Data)
		}
		mustGet(t, g, "k", "new")
		if loads.Load() != 2 {
			t.Fatalf("loads = %d, want 2", loads.Load())
		}
	})
}

// TestSetDuringLoad: a load in progress cannot overwrite a Set.
func TestSetDuringLoad(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		g := newTestGroup(t, GroupConfig{}, func(context.Context, string) (Value, error) {
			<-release
			return Value{Data: []byte("origin")}, nil
		})
		done := make(chan struct{})
		go func() {
			g.Get(context.Background(), "k")
			close(done)
		}()
		synctest.Wait()
		if _, err := g.setLocal(t.Context(), "k", Value{Data: []byte("set")}); err != nil {
			t.Fatal(err)
		}
		close(release)
		<-done
		mustGet(t, g, "k", "set")
	})
}

func TestSetLocalTTL(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := newOrigin()
		g := newTestGroup(t, GroupConfig{TTL: time.Minute}, o.getter(0).(GetterFunc))
		g.setLocal(t.Context(), "a", Value{Data: []byte("set")})
		g.setLocal(t.Context(), "b", Value{Data: []byte("set"), Expires: time.Now().Add(time.Second)})
		g.setLocal(t.Context(), "c", Value{Data: []byte("set"), Expires: time.Now().Add(-time.Second)})
		mustGet(t, g, "a", "set")
		mustGet(t, g, "b", "set")
		mustGet(t, g, "c", "v:c") // already expired: not stored
		time.Sleep(time.Second)
		mustGet(t, g, "a", "set")
		mustGet(t, g, "b", "v:b")
		time.Sleep(time.Minute)
		mustGet(t, g, "a", "v:a")
	})
}

// TestHitAllocations: a hit allocates nothing, so a hot key costs the
// garbage collector nothing however often it is read.
func TestHitAllocations(t *testing.T) {
	g := newTestGroup(t, GroupConfig{TTL: time.Hour}, func(context.Context, string) (Value, error) {
		return Value{Data: []byte("x")}, nil
	})
	ctx := context.Background()
	mustGet(t, g, "k", "x")
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := g.Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("a hit allocates %v times, want <= 1", allocs)
	}
}

// nilPeerPicker is a buggy picker: it names no peer but says a peer owns key.
type nilPeerPicker struct{ NoPeers }

func (nilPeerPicker) PickPeer(string) (Peer, bool) { return nil, true }

func TestNilPeerMeansThisNode(t *testing.T) {
	t.Parallel()
	o := newOrigin()
	g, err := newNode(t, Config{Peers: nilPeerPicker{}}).NewGroup(GroupConfig{Name: "g", MaxBytes: 1 << 20, Getter: o.getter(0)})
	if err != nil {
		t.Fatal(err)
	}
	mustGet(t, g, "k", "v:k")
	if _, err := g.Set(t.Context(), "s", Value{Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Remove(t.Context(), "s"); err != nil {
		t.Fatal(err)
	}
	if s := g.Stats(); s.MainItems != 1 || s.LocalLoads != 1 {
		t.Fatalf("MainItems %d, LocalLoads %d; want 1, 1", s.MainItems, s.LocalLoads)
	}
}

// TestOriginRefusingALargeValue: an origin that stops reading at the limit
// and returns ErrTooLarge itself is counted and remembered the same way as a
// value over MaxValueBytes.
func TestOriginRefusingALargeValue(t *testing.T) {
	t.Parallel()
	var loads atomic.Int64
	g := newTestGroup(t, GroupConfig{}, func(context.Context, string) (Value, error) {
		loads.Add(1)
		return Value{}, fmt.Errorf("upstream body over the limit: %w", ErrTooLarge)
	})
	for range 3 {
		if _, err := g.Get(t.Context(), "k"); !errors.Is(err, ErrLoad) || !errors.Is(err, ErrTooLarge) {
			t.Fatalf("err = %v, want ErrLoad and ErrTooLarge", err)
		}
	}
	if s := g.Stats(); loads.Load() != 1 || s.TooLarge != 1 || s.Errors != 0 {
		t.Fatalf("loads %d, TooLarge %d, Errors %d; want 1, 1, 0", loads.Load(), s.TooLarge, s.Errors)
	}
}

// TestStatsCountDeadBytes removes one entry in five of full pages: the
// removed entries' bytes are dead until compaction, Stats reports them, and
// with the entries they stay within the budget.
func TestStatsCountDeadBytes(t *testing.T) {
	t.Parallel()
	value := make([]byte, 100)
	g := newTestGroup(t, GroupConfig{MaxBytes: 1 << 20}, func(context.Context, string) (Value, error) {
		return Value{Data: value}, nil
	})
	ctx := context.Background()
	for i := range 2000 {
		if _, err := g.Get(ctx, "key"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Full pages' unused tails are dead from the start.
	before := g.Stats().DeadBytes
	// One in five removed: no page falls below 3/4 live, so none is
	// compacted and the removed entries' bytes in closed pages stay dead.
	removed := 0
	for i := 0; i < 2000; i += 5 {
		if _, err := g.Remove(ctx, "key"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		removed++
	}
	s := g.Stats()
	if d := s.DeadBytes - before; d <= 0 || d > int64(removed)*(8+int64(len("key0000"))+100) /* a page header, the key, the value */ {
		t.Fatalf("DeadBytes went from %d to %d after removing %d entries of 100 B", before, s.DeadBytes, removed)
	}
	if total := s.MainBytes + s.HotBytes + s.DeadBytes; total > g.Config().MaxBytes {
		t.Fatalf("main %d + hot %d + dead %d = %d > MaxBytes %d", s.MainBytes, s.HotBytes, s.DeadBytes, total, g.Config().MaxBytes)
	}
}
