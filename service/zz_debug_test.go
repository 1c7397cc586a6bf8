package service

import (
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
)

func TestZZIdleProfile(t *testing.T) {
	runtime.MemProfileRate = 1
	e := neverEngine()
	ts := newTestServer(t, e, Options{Shutdown: make(chan struct{})})
	addr := ts.Listener.Addr().String()
	c0, _ := openIdleWSConn(addr)
	c0.Close()
	var conns []net.Conn
	for range 1000 {
		c, err := openIdleWSConn(addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	runtime.GC()
	runtime.GC()
	f, _ := os.Create("/tmp/idle-conn.heap")
	pprof.Lookup("heap").WriteTo(f, 0)
	f.Close()
	for _, c := range conns {
		c.Close()
	}
}
