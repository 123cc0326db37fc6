// Package joblog reads the logs of exec jobs, which execjob writes: one
// log per job, that every attempt appends to. Logs is where they are kept:
// Dir keeps them in files, <log dir>/<job ID>.log, on the worker's machine;
// pgstore's Logs keeps them in the database, where every machine reads
// them. The package logstest is the suite every Logs passes.
//
// # Format
//
// A log holds the program's output (standard output and standard error,
// interleaved as written) and lines of jobdir's own, called notes: a header
// before each attempt, a footer after it, and a marker where output was
// dropped because the log reached its bound. A note is one line that starts
// with NotePrefix ("--- jobdir: ") and ends with NoteSuffix (" ---"), and it
// always starts a line: when the output before it did not end with a
// newline, jobdir writes one and says so by ending the note with
// NoNewlineSuffix. So the program's bytes are the log without its note
// lines and without the newline before each note that says it added one;
// Raw gives exactly that, as long as the program does not print lines that
// look like notes itself.
//
// When a log reaches its bound, each further attempt keeps the beginning of
// its output and the end (where errors usually are), with a marker note
// between them that says how many bytes were dropped. The end is written
// when the attempt ends, so a reader following the log sees it then.
//
// # Guarantees
//
// Open refuses anything at a log's path that is not a regular file with one
// link (a symbolic link, a FIFO, a device, a hard link to another file),
// without following a symbolic link or blocking on a FIFO, so a file
// planted in the log directory cannot make a reader (or the HTTP API) read
// another file.
package joblog
