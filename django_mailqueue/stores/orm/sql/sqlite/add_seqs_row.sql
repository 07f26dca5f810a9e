-- An id of add_seqs.sql.
%s
