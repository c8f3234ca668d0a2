// Package rejoin holds the restart protocol's decisions: how a pserver
// incarnation and the running trainers meet again. A trainer tells every
// pserver incarnation its Position; a pserver that heard every trainer
// decides where it starts (PlanStart); a trainer decides whether it can go
// on with a restarted pserver (ResumeConflict) and what it sends it again
// (PlanResend). It is pure: it imports only the standard library, does no
// I/O and keeps no clock, so every scenario is a table test; package comm
// does the I/O around it. See docs/runtime.md.
package rejoin
