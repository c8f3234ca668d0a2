// Package atomicfile writes a file so that a reader, or a crash, sees
// either the old file or the whole new one: the bytes go to a temporary
// file beside it, which is synced and renamed into place, and the
// directory is synced after. Model files, checkpoints and their
// manifests, plan directories, predictions and generated data are all
// written this way.
package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// File is a file being written in place of path. Write to it, then Commit;
// Abort (also safe after Commit, so it can be deferred) drops it.
type File struct {
	*os.File
	path string
	done bool
}

// Create starts writing path.
func Create(path string) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	// Readable as a file os.Create makes (CreateTemp makes it private).
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &File{File: f, path: path}, nil
}

// Commit syncs what was written and renames it into place. It does not
// rename after a failed sync or close: the old file stays.
func (f *File) Commit() error {
	if f.done {
		return errors.New("atomicfile: " + f.path + " was already committed or aborted")
	}
	f.done = true
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), f.path)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	syncDir(filepath.Dir(f.path))
	return nil
}

// Abort drops the file; the old one, if any, stays.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.Close()
	os.Remove(f.Name())
}

// Write writes path with what fn writes, atomically.
func Write(path string, fn func(w io.Writer) error) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := fn(f); err != nil {
		return err
	}
	return f.Commit()
}

// WriteBytes writes b as path, atomically.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// syncDir makes a rename in dir durable (best effort: not every
// filesystem can sync a directory).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
