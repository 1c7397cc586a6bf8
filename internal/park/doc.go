// Package park keeps connections that have nothing to do off goroutines.
//
// A goroutine blocked in Read costs its stack (4 KB and up) and whatever
// buffers its caller keeps; a server that holds 100,000 idle clients
// cannot afford one each. A Poller waits for many connections to become
// readable on one goroutine (Linux's epoll; elsewhere there is none and
// callers keep their goroutines). A Listener uses it for HTTP/1.1
// keep-alive connections: between requests a connection leaves net/http,
// whose goroutine, 4 KB reader and 4 KB writer go with it, and comes back
// through Accept, as a new connection, when its next request arrives.
package park
