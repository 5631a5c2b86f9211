-- Per-customer revenue: an aggregate over the orders seed.
select
    o.customer_id,
    sum(o.amount) as total,
    count(*) as order_count
from {{ ref('orders') }} as o
group by o.customer_id
