package jobstore

import (
	"fmt"
	"maps"
	"slices"

	"github.com/jobdir/jobdir/internal/clip"
)

// The bounds of a job's metadata (Spec.Meta) and tags (Spec.Tags).
const (
	// MaxMetaEntries is the most entries a job's Meta may hold.
	MaxMetaEntries = 32
	// MaxMetaKeyLen is the longest key of Meta, in bytes.
	MaxMetaKeyLen = 128
	// MaxMetaValueLen is the longest value of Meta, in bytes.
	MaxMetaValueLen = 1024
	// MaxTags is the most tags a job may have.
	MaxTags = 16
	// MaxTagLen is the longest tag, in bytes.
	MaxTagLen = 64
)

// ValidateMeta checks a job's metadata: at most MaxMetaEntries entries,
// each key 1 to MaxMetaKeyLen bytes of letters, digits and ._:/- (as a
// kind), each value at most MaxMetaValueLen bytes of printable UTF-8 (as a
// key). Its error wraps ErrInvalidInput and names the entry.
func ValidateMeta(meta map[string]string) error {
	if len(meta) > MaxMetaEntries {
		return fmt.Errorf("%w: meta has %d entries, limit %d", ErrInvalidInput, len(meta), MaxMetaEntries)
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		if k == "" {
			return fmt.Errorf("%w: a meta key is empty", ErrInvalidInput)
		}
		if len(k) > MaxMetaKeyLen {
			return fmt.Errorf("%w: meta key %q is %d bytes, limit %d", ErrInvalidInput, clip.String(k, 64), len(k), MaxMetaKeyLen)
		}
		if !nameOf(k) {
			return fmt.Errorf("%w: meta key %q: only letters, digits and ._:/- are allowed", ErrInvalidInput, clip.String(k, 64))
		}
		v := meta[k]
		if len(v) > MaxMetaValueLen {
			return fmt.Errorf("%w: meta %s is %d bytes, limit %d", ErrInvalidInput, k, len(v), MaxMetaValueLen)
		}
		if err := checkPrintable("meta "+k, v); err != nil {
			return err
		}
	}
	return nil
}

// ValidateTag checks one tag: 1 to MaxTagLen bytes of letters, digits and
// ._:/-= . Its error wraps ErrInvalidInput.
func ValidateTag(tag string) error {
	if tag == "" {
		return fmt.Errorf("%w: a tag is empty", ErrInvalidInput)
	}
	if len(tag) > MaxTagLen {
		return fmt.Errorf("%w: tag %q is %d bytes, limit %d", ErrInvalidInput, clip.String(tag, 64), len(tag), MaxTagLen)
	}
	for i := 0; i < len(tag); i++ {
		if !nameByte(tag[i]) && tag[i] != '=' {
			return fmt.Errorf("%w: tag %q: only letters, digits and ._:/-= are allowed", ErrInvalidInput, clip.String(tag, 64))
		}
	}
	return nil
}

// ValidateTags checks a job's tags: at most MaxTags, each valid
// (ValidateTag). A tag given twice counts once: NewJob keeps the first.
func ValidateTags(tags []string) error {
	for _, t := range tags {
		if err := ValidateTag(t); err != nil {
			return err
		}
	}
	if n := len(uniqueTags(tags)); n > MaxTags {
		return fmt.Errorf("%w: %d tags, limit %d", ErrInvalidInput, n, MaxTags)
	}
	return nil
}

// HasTag reports whether j has tag.
func (j Job) HasTag(tag string) bool { return slices.Contains(j.Tags, tag) }

// uniqueTags returns tags without repeats, in the order of their first
// appearance, and nil for none. It never returns tags itself.
func uniqueTags(tags []string) []string {
	if len(tags) == 0 {
		return nil
	}
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// cloneMeta returns a copy of meta, nil for none.
func cloneMeta(meta map[string]string) map[string]string {
	if len(meta) == 0 {
		return nil
	}
	return maps.Clone(meta)
}
