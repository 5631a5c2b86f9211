"""Delta rules. `relation` and `rules/` give the FROM/WHERE part of a query as terms; `plans` gives a
plan's contents and delta as queries; `stream` gives a stream table's row delta and its contents
with the bookkeeping columns its layout needs. Everything is built as sqlglot trees and rendered
once, in the target's dialect."""
