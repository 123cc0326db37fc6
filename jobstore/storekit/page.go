package storekit

import (
	"github.com/jobdir/jobdir/jobstore"
)

// PageBuilder collects the jobs of one List page under the Limit and
// MaxBytes of its (normalized) ListOptions, so that every store cuts pages
// the same way. A store offers it each matching job in list order until
// Add returns false. It is not safe for concurrent use.
type PageBuilder struct {
	opts  jobstore.ListOptions
	page  jobstore.Page
	bytes int
}

// NewPageBuilder returns a PageBuilder for opts, which should be
// normalized (see ListOptions.Normalize).
func NewPageBuilder(opts jobstore.ListOptions) *PageBuilder {
	return &PageBuilder{opts: opts, page: jobstore.Page{Jobs: []jobstore.Job{}}}
}

// Add puts j, a job that matches the filters and comes next in list order,
// on the page and reports true, or reports false if the page is full: it
// holds Limit jobs, or j would bring it over MaxBytes. Then j is not added,
// the page's Next is set to continue after its last job, and the caller
// stops. The first job is always added.
func (b *PageBuilder) Add(j jobstore.Job) bool {
	n := len(b.page.Jobs)
	if n > 0 && n >= b.opts.Limit && b.opts.Limit > 0 {
		b.page.Next = b.page.Jobs[n-1].ID
		return false
	}
	size := j.Size()
	if n > 0 && b.opts.MaxBytes > 0 && b.bytes+size > b.opts.MaxBytes {
		b.page.Next = b.page.Jobs[n-1].ID
		b.page.ByteLimited = true
		return false
	}
	b.page.Jobs = append(b.page.Jobs, j)
	b.bytes += size
	return true
}

// Page returns the page. Errors is left to the store.
func (b *PageBuilder) Page() jobstore.Page { return b.page }
