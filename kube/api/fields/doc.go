// Package fields writes the field selectors of list and watch requests.
package fields
