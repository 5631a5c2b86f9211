-- Every order with its customer: an inner join of the two seeds.
select
    o.id as order_id,
    c.name,
    c.tier,
    o.amount
from {{ ref('orders') }} as o
join {{ ref('customers') }} as c on o.customer_id = c.id
