package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pooled runs a read on a connection of the pool taken as Store.acquire
// takes one: when PostgreSQL refuses the pool one more connection for
// want of room, the read waits for one the pool holds, as a write does,
// where pgxpool's own QueryRow and Query fail it. The connection goes
// back to the pool once the row is scanned or the rows are closed.
type pooled struct{ s *Store }

// reads is the Store's reads' pooled.
func (s *Store) reads() pooled { return pooled{s} }

func (p pooled) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	conn, err := p.s.acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	return &pooledRow{row: conn.QueryRow(ctx, sql, args...), conn: conn}
}

func (p pooled) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	conn, err := p.s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		conn.Release()
		return nil, err
	}
	return &pooledRows{Rows: rows, conn: conn}, nil
}

// errRow is a row whose Scan fails with err: a read that got no
// connection.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type pooledRow struct {
	row  pgx.Row
	conn *pgxpool.Conn
}

func (r *pooledRow) Scan(dest ...any) error {
	defer r.conn.Release()
	return r.row.Scan(dest...)
}

// pooledRows are rows that give their connection back once closed,
// which pgx does when they are read to their end.
type pooledRows struct {
	pgx.Rows
	conn     *pgxpool.Conn
	released bool
}

func (r *pooledRows) Close() {
	r.Rows.Close()
	if !r.released {
		r.released = true
		r.conn.Release()
	}
}

func (r *pooledRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}
