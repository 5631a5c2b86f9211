"""One delta rule per operator of the FROM/WHERE part. Each rule gives a relation's rows after the
batch (`after`) and its change over the batch (`delta`) as lists of terms (`dbt_ivm.delta.terms`);
`dbt_ivm.delta.relation` dispatches on the operator."""
