// Package faultnet has the network faults that the project's tests inject:
// a TCP proxy that can cut every connection through it, as a partition
// would. It is for tests only; nothing in a program imports it.
package faultnet

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections from a loopback port to a target. Cut
// closes every connection and refuses new ones (each is closed as soon as
// it is accepted), as a network partition would; Restore forwards again.
// The listener stays open throughout: closed, its port would be free for
// any process's outgoing connection to take while the cut lasts, and
// Restore could not listen on it again. A Proxy is safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	cutOff bool                  // guarded by mu
	conns  map[net.Conn]struct{} // guarded by mu
	wg     sync.WaitGroup
}

// Listen starts a proxy to target on a free loopback port.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			p.mu.Lock()
			refused := p.cutOff
			p.mu.Unlock()
			if refused {
				c.Close()
				continue
			}
			p.wg.Add(1)
			go p.pipe(c)
		}
	}()
	return p, nil
}

// Addr returns the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and closes its connections, and waits for them.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) pipe(c net.Conn) {
	defer p.wg.Done()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cutOff { // cut while dialing
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(u, c); done <- struct{}{} }()
	go func() { io.Copy(c, u); done <- struct{}{} }()
	<-done
	c.Close()
	u.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// Cut closes every connection through the proxy and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore forwards new connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = false
}
