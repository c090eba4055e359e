package peers

import (
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// dial connects to cfg.Endpoints with the settings a registration needs to survive network
// faults: keepalive pings and a reconnect backoff bounded well inside a TTL.
func dial(cfg Config) (*clientv3.Client, error) {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		// Pings find a connection that died without a word (a node cut
		// off from the network): without them the client waits on TCP
		// retransmissions, which back off to many seconds, and a node
		// back from a 20 s partition took 14 s to register again. Lease
		// keepalives keep the connection busy, so a ping goes out only
		// when nothing arrived for 6 s; etcd refuses pings more often
		// than every 5 s (too_many_pings).
		DialKeepAliveTime:    6 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
		// gRPC's default reconnect backoff grows to two minutes; after an outage the
		// node must be back well inside a TTL.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: minRetry, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxRetry},
			MinConnectTimeout: cfg.TTL,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("peers: connect to etcd %v: %w", cfg.Endpoints, err)
	}
	return client, nil
}
