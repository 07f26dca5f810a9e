-- A recipient of add_one.sql: position, address, domain.
(%b, %b, %b)
