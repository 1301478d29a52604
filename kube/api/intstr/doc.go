// Package intstr holds IntOrString, the API's field that is either a
// number or a name (a Service's targetPort, a NetworkPolicy's port).
package intstr
