// Package schema names API groups, versions, kinds and resources.
package schema
